"""One global model: every client trains it, the server averages it (``FedAvgServer``)."""
