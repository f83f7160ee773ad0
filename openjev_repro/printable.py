"""Text from outside (a server's /health, a recipe, a file name, an HTTP body) made safe to print.

    printable("1.0\nerror: forged")   ->  '1.0\\nerror: forged'   (one line: it cannot start another)

Used where such text reaches a person: every `error:` line (cli's `user_errors`) and the report's
banners. Control characters (C0, DEL, C1), line and paragraph separators and the bidirectional
overrides are written as Python escapes, so a message stays one line and shows what was there;
everything else (accents, CJK, emoji) is left alone.
"""

from __future__ import annotations

import re

__all__ = ["printable"]

_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """`text` with every control or line-breaking character written as an escape (see the module)."""
    return _UNSAFE.sub(_escape, text)
