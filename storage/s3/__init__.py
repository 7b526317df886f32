"""Datasets on S3-compatible object storage, in kamu's layout (see `storage.s3.layout`)."""
