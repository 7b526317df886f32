"""The HTTP transport: the transfer server (kamu's simple protocol, pushes), its client source."""
