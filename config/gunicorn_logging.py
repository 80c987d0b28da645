"""gunicorn's logger for `make run`: the access log without polling requests (the
gateway's route table about three times a second, /healthz, htmx refreshes, chart
fetches), which config/log_filters.py calls housekeeping; LOG_LEVEL=DEBUG shows them."""

from gunicorn.glogging import Logger

from config.log_filters import QuietHousekeeping


class QuietAccessLogger(Logger):
    def setup(self, cfg):
        super().setup(cfg)
        self.access_log.addFilter(QuietHousekeeping())
