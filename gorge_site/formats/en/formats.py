"""Dates and times as every page of this service shows them, the admin's lists included: with seconds and the
zone (`2026-12-03 09:30:05 UTC`), never `Dec. 3, 2026, 9:30 a.m.`."""

DATETIME_FORMAT = "Y-m-d H:i:s e"
SHORT_DATETIME_FORMAT = "Y-m-d H:i:s e"
DATE_FORMAT = "Y-m-d"
SHORT_DATE_FORMAT = "Y-m-d"
TIME_FORMAT = "H:i:s"
