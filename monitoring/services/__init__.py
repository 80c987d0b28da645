"""Every write of monitoring, one module per concern: store.py (samples, roll-ups,
retention), collector.py (the scrape tick), canary.py (the judge's verdicts and the closed
loop), alerts.py and notifications.py (deliveries and channels)."""
