"""Date formats of the site (LANGUAGE_CODE en-us): a 24-hour clock everywhere, as the
dashboard's tables and charts use, instead of Django's "4:05 p.m.". Loaded through
FORMAT_MODULE_PATH, so the admin and any unformatted {{ datetime }} follow it too."""

DATE_FORMAT = "Y-m-d"
TIME_FORMAT = "H:i:s"
DATETIME_FORMAT = "Y-m-d H:i:s"
SHORT_DATE_FORMAT = "Y-m-d"
SHORT_DATETIME_FORMAT = "Y-m-d H:i"
