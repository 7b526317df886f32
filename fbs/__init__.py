"""The ODF metadata model (spec v0.38.0): schema, values, codec, manifests, multiformats, DIDs.

Everything in this package is pure: functions take bytes or values and do no I/O.
"""
