"""SLO contracts and their books: reports of every request and batch, fulfilment per window,
alerts, usage, the dashboard and ``/metrics``."""
