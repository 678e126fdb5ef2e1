"""The user writes dates as DD/MM/YYYY: every date in or out goes through here."""

import datetime

FORMAT = "%d/%m/%Y"


class BadDate(ValueError):
    pass


def parse(text):
    if not isinstance(text, str) or len(text) != 10:
        raise BadDate("dates are DD/MM/YYYY")
    try:
        return datetime.datetime.strptime(text, FORMAT).date()
    except ValueError:
        raise BadDate("dates are DD/MM/YYYY")


def show(day):
    return day.strftime(FORMAT)


def week_of(day):
    """The 7 days of the week holding ``day``; the user's weeks start on Monday."""
    monday = day - datetime.timedelta(days=day.weekday())
    return [monday + datetime.timedelta(days=i) for i in range(7)]
