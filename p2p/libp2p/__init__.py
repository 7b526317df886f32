"""The libp2p transport: supervised host, pubsub guard, gossip, exchange, admission, identity."""
