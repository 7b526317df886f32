"""The libp2p transport: the supervised host, pubsub guard, gossip, exchange, admission, identity."""
