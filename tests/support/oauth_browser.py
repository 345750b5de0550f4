#!/usr/bin/env python3
"""A stand-in for a person's browser, for ``$BROWSER`` in the OAuth tests.

Python's ``webbrowser`` runs ``$BROWSER URL``; this GETs the authorization URL
and follows the authorization server's redirects -- to agentd's loopback
redirect listener -- as a browser would once the person has consented (the
test authorization servers consent on their own).  It only ever talks to
loopback hosts.  Exit status 0 when the last answer was a 2xx.
"""

from __future__ import annotations

import sys
import urllib.error
import urllib.request
from urllib.parse import urlsplit

LOOPBACK = {"127.0.0.1", "localhost", "::1"}


class _Loopback(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        if urlsplit(newurl).hostname not in LOOPBACK:
            raise urllib.error.HTTPError(newurl, code, "redirect off loopback refused",
                                         headers, fp)
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def main() -> int:
    url = sys.argv[-1]
    if urlsplit(url).hostname not in LOOPBACK:
        print(f"oauth_browser: refusing non-loopback {url}", file=sys.stderr)
        return 2
    opener = urllib.request.build_opener(_Loopback())
    try:
        with opener.open(url, timeout=30) as resp:
            status = resp.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    except OSError as exc:
        print(f"oauth_browser: {exc}", file=sys.stderr)
        return 1
    print(f"oauth_browser: {status}", file=sys.stderr)
    return 0 if 200 <= status < 300 else 1


if __name__ == "__main__":
    sys.exit(main())
