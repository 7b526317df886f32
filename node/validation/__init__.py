"""Validation: re-running transforms (`replay`), the validator, attestation trust and disputes."""
