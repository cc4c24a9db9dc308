"""Real servers for the integration tests: started in temp dirs on free loopback ports,
probed until they answer, stopped by PID. One module per server kind."""
