"""tensorgate's service layer: the command line now, the HTTP server next."""
