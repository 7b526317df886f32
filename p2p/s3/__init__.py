"""Datasets in S3 repositories: a pull source (`source`) and a push target (`push`)."""
