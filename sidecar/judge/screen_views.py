"""What screening reads: the data folded to one spelling, and views that undo hiding.

:func:`fold` is applied to every block before any rule runs: compatibility
forms folded (NFKC: fullwidth, ligatures, presentation forms), accents on
Latin letters and Arabic vowel marks, hamza carriers and tatweel removed,
zero-width and bidirectional controls removed. Rules are written for the
folded spelling (``ignorez les instructions precedentes``).

:func:`derived_views` then yields the same text as an attacker may have
hidden it, each only when it could matter, so benign text costs little:

- ``reversed_text``: the whole text reversed (a right-to-left override shows
  reversed characters as readable text; a plain reversed sentence too), when
  a strong cue appears reversed;
- ``encoded_rot13``: ROT13 of the text, when a strong cue appears in ROT13;
- ``homoglyphs``: Cyrillic and Greek look-alikes mapped to Latin, when that
  spells a strong cue that was not there;
- ``encoded``: base64 (standard and URL-safe), hex, ``\\xNN``, percent and
  HTML-entity encodings decoded, when the result is text, and decoded again
  up to :data:`MAX_DEPTH` levels. Only runs of at least :data:`MIN_ENCODED`
  characters are tried, at most :data:`MAX_CANDIDATES` of them, and at most
  :data:`MAX_DECODED` characters are kept per block.

Everything here is linear in the text's length.
"""

from __future__ import annotations

import base64
import binascii
import html
import re
import unicodedata
from collections.abc import Iterable, Iterator
from urllib.parse import unquote_to_bytes

MIN_ENCODED = 16
MAX_CANDIDATES = 64
MAX_DECODED = 65_536
MAX_DEPTH = 2

# Zero-width, bidirectional and invisible formatting characters (raw, not escaped).
_INVISIBLE = re.compile(
    "[\u00ad\u034f\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff]"
)
# Accents on Latin letters (after NFKD), and Arabic marks: harakat, hamza and
# madda carriers, superscript alef, tatweel.
_LATIN_MARKS = re.compile("(?<=[A-Za-z])[\u0300-\u036f]+")
_ARABIC_MARKS = re.compile("[\u0610-\u061a\u064b-\u065f\u0670\u0640\u06d6-\u06ed]")


def fold(text: str) -> str:
    """``text`` in the one spelling the rules are written for (case kept)."""
    text = _INVISIBLE.sub("", text)
    text = unicodedata.normalize("NFKD", text)
    text = _LATIN_MARKS.sub("", text)
    text = _ARABIC_MARKS.sub("", text)
    return unicodedata.normalize("NFC", text)


def fold_pattern(pattern: str) -> str:
    """A rule's pattern in the folded spelling (its regex syntax is ASCII and unchanged)."""
    return unicodedata.normalize(
        "NFC", _ARABIC_MARKS.sub("", unicodedata.normalize("NFKD", pattern))
    )


# --- cheap views, each gated on strong cues -------------------------------------------

_ROT13 = str.maketrans(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
    "nopqrstuvwxyzabcdefghijklmNOPQRSTUVWXYZABCDEFGHIJKLM",
)
# Cyrillic and Greek letters that look like Latin ones (lower case, after folding).
_LOOKALIKES = str.maketrans(
    {
        "а": "a",
        "в": "b",
        "с": "c",
        "е": "e",
        "һ": "h",
        "і": "i",
        "ј": "j",
        "к": "k",
        "м": "m",
        "н": "h",
        "о": "o",
        "р": "p",
        "ѕ": "s",
        "т": "t",
        "у": "y",
        "х": "x",
        "ԁ": "d",
        "ɡ": "g",
        "ӏ": "l",
        "ԛ": "q",
        "ѡ": "w",
        "α": "a",
        "β": "b",
        "ε": "e",
        "ι": "i",
        "κ": "k",
        "ν": "v",
        "ο": "o",
        "ρ": "p",
        "τ": "t",
        "υ": "u",
        "χ": "x",
        "γ": "y",
    }
)
_LOOKALIKE_CHARS = re.compile("[авсеһіјкмнорѕтухԁɡӏԛѡαβειικνορτυχγ]")
_LATIN = re.compile("[a-z]")


def _any_in(needles: Iterable[str], text: str) -> bool:
    return any(n in text for n in needles)


def derived_views(
    view: str, lowered: str, strong: frozenset[str], strong_ascii: frozenset[str]
) -> Iterator[tuple[str, str]]:
    """(label, text) views of ``view`` (``lowered`` is its lower case) worth screening.

    ``strong`` are long, distinctive cues in every language (lower case);
    ``strong_ascii`` those written in Latin letters.
    """
    backwards = lowered[::-1]
    if _any_in(strong, backwards):
        yield "reversed_text", view[::-1]
    if _any_in((cue.translate(_ROT13) for cue in strong_ascii), lowered):
        yield "encoded_rot13", view.translate(_ROT13)
    if _LOOKALIKE_CHARS.search(lowered) and _LATIN.search(lowered):
        skeleton = lowered.translate(_LOOKALIKES)
        if any(cue in skeleton and cue not in lowered for cue in strong_ascii):
            yield "homoglyphs", skeleton
    decoded = decode_hidden(view)
    if decoded:
        yield "encoded", decoded


# --- encodings ------------------------------------------------------------------------

_BASE64 = re.compile(
    rf"[A-Za-z0-9+/]{{{MIN_ENCODED},}}={{0,2}}|[A-Za-z0-9_-]{{{MIN_ENCODED},}}={{0,2}}"
)
_HEX = re.compile(rf"(?:[0-9A-Fa-f]{{2}}){{{MIN_ENCODED // 2},}}")
_ESCAPED_HEX = re.compile(r"(?:\\x[0-9A-Fa-f]{2}){6,}")
_PERCENT = re.compile(r"(?:[^\s%]{0,8}%[0-9A-Fa-f]{2}){6,}[^\s%]{0,8}")
_ENTITIES = re.compile(r"(?:&#(?:[0-9]{1,7}|[xX][0-9A-Fa-f]{1,6});){6,}")


def _as_text(data: bytes) -> str | None:
    """``data`` as text when it is UTF-8 that reads as text, else None."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if len(text) < 6:
        return None
    readable = sum(1 for c in text if c.isprintable() or c in "\n\r\t")
    letters = sum(1 for c in text if c.isalpha())
    return text if readable >= 0.95 * len(text) and letters >= 0.4 * len(text) else None


def _base64(run: str) -> bytes | None:
    body = run.rstrip("=")
    padded = body + "=" * (-len(body) % 4)
    try:
        if "-" in body or "_" in body:
            return base64.urlsafe_b64decode(padded)
        return base64.b64decode(padded, validate=True)
    except (binascii.Error, ValueError):
        return None


# No run is decoded past this many characters (4 is a multiple of base64's and hex's units).
_MAX_RUN = 4 * MAX_DECODED


def _candidates(text: str) -> Iterator[bytes | str]:
    for match in _BASE64.finditer(text):
        data = _base64(match.group()[:_MAX_RUN])
        if data is not None:
            yield data
    for match in _HEX.finditer(text):
        yield bytes.fromhex(match.group()[:_MAX_RUN])
    for match in _ESCAPED_HEX.finditer(text):
        yield bytes.fromhex(match.group()[:_MAX_RUN].replace("\\x", ""))
    for match in _PERCENT.finditer(text):
        yield unquote_to_bytes(match.group()[:_MAX_RUN])
    for match in _ENTITIES.finditer(text):
        yield html.unescape(match.group()[:_MAX_RUN])


def decode_hidden(text: str, depth: int = MAX_DEPTH) -> str:
    """Text hidden in ``text`` by common encodings, decoded (bounded; see the module doc)."""
    found: list[str] = []
    budget = MAX_DECODED
    pending = [(text, depth)]
    tried = 0
    while pending and budget > 0:
        source, level = pending.pop()
        for candidate in _candidates(source):
            tried += 1
            if tried > MAX_CANDIDATES or budget <= 0:
                break
            decoded = _as_text(candidate) if isinstance(candidate, bytes) else candidate
            if not decoded or decoded == source:
                continue
            decoded = fold(decoded[: budget - 1])
            budget -= len(decoded) + 1  # and its line break
            found.append(decoded)
            if level > 1:
                pending.append((decoded, level - 1))
    return "\n".join(found)
