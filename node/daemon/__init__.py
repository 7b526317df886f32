"""The node daemon (`odf node run`): `service` composes the parts in the sibling modules."""
