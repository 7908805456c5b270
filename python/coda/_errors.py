"""Errors: coda_status values by name, CodaError and the check every
binding call goes through."""

from ._lib import lib

STATUS_NAMES = {
    0: "CODA_OK",
    1: "CODA_ERR_INVALID_ARGUMENT",
    2: "CODA_ERR_PARSE",
    3: "CODA_ERR_TYPE",
    4: "CODA_ERR_SHAPE",
    5: "CODA_ERR_DTYPE",
    6: "CODA_ERR_LAYOUT",
    7: "CODA_ERR_ALIAS",
    8: "CODA_ERR_OUT_OF_MEMORY",
    9: "CODA_ERR_NOT_SUPPORTED",
    10: "CODA_ERR_BACKEND",
    11: "CODA_ERR_IO",
    12: "CODA_ERR_OVERFLOW",
    13: "CODA_ERR_INTERNAL",
}


class CodaError(RuntimeError):
    """A failed coda call: `status` (the coda_status value), `status_name`
    (e.g. "CODA_ERR_SHAPE") and `message` (coda_last_error)."""

    def __init__(self, status, message):
        self.status = int(status)
        self.status_name = STATUS_NAMES.get(self.status, "CODA_ERR_%d" % self.status)
        self.message = message
        super().__init__("%s: %s" % (self.status_name, message))


def _check(ctx_handle, status):
    if status != 0:
        msg = lib.coda_last_error(ctx_handle) if ctx_handle else None
        msg = msg.decode("utf-8", "replace") if msg else lib.coda_status_string(status).decode()
        raise CodaError(status, msg)
