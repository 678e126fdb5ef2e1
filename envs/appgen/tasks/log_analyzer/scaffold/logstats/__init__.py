"""logstats: statistics over web server access logs (see spec.md)."""
