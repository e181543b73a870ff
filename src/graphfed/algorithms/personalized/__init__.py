"""Each client keeps its own model across rounds (clients extend ``PersonalClient``)."""
