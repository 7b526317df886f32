"""What odf-node does, as plain functions: each takes a workspace and typed, frozen
options and returns a typed result, raising typed errors (`fbs.errors.OdfError`, mapped
to exit codes and HTTP statuses by `node.error_contract`).

The ``odf`` commands (`node.commands`) parse arguments, call one of these and render its
result; the HTTP API and the Python API call the same functions for the same
operations. Nothing here prints, reads ``argparse`` namespaces or imports the CLI.
"""
