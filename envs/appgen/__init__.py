"""AppGen: multi-file application generation with hidden tests (``agentgym/AppGen-v0``)."""
