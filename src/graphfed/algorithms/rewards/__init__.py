"""Gradient rewards by contribution: agents are valued and each gets a sparsified share of the
aggregate (servers extend ``RewardServer``)."""
