"""Remote datasets: resolving `odf pull`'s sources, kamu's pull/push aliases, replica names."""
