"""Exceptions: one class per ec-store status code, all subclasses of ecstore.Error."""


class Error(Exception):
    """A failed ec-store call; the message says what was wrong and what to do."""


class NotFound(Error, KeyError):
    """No entry under that namespace and key."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class Corruption(Error):
    """Stored bytes failed their checksum; the entry was dropped."""


class IOError(Error, OSError):  # noqa: A001 - the status code's name
    """The device failed a read or write; nothing acknowledged was lost. An OSError too, so
    `except OSError` catches it as it catches the built-in one."""


class NoSpace(Error):
    """The disk tier (or its filesystem) is full, or the store was opened read-only."""


class Busy(Error):
    """The pool stayed full of leased entries; release leases or retry."""


class InvalidArgument(Error, ValueError):
    """A bad key, namespace, dtype, shape or buffer."""


class Unavailable(Error, ConnectionError):
    """The server cannot be reached (or the store is closed)."""


class PermissionDenied(Error, PermissionError):
    """The principal this connection proved lacks the right for that namespace, or a TLS
    certificate was refused; the message names which."""


__all__ = ["Error", "NotFound", "Corruption", "IOError", "NoSpace", "Busy",
           "InvalidArgument", "Unavailable", "PermissionDenied"]
