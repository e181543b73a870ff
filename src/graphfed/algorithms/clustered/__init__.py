"""Clustered FL: one model per cluster of clients (servers extend ``GCFLServer``)."""
