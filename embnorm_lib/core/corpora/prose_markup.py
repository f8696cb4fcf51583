"""Markup to plain paragraphs for the prose corpus (prosecorpus.py): HTML pages and Perl's POD files, and the test
of whether a paragraph is running prose."""
from __future__ import annotations

import re
from html.parser import HTMLParser

# elements whose own text is one paragraph of the page
_PARAGRAPH_TAGS = {"p", "li", "dd", "dt", "blockquote", "figcaption"}
# elements whose whole subtree is not prose: code, tables, scripts, page furniture
_SKIP_TAGS = {"pre", "script", "style", "table", "nav", "header", "footer", "head", "title", "button", "form",
              "select", "textarea", "svg", "math"}
# a class or id naming page furniture: the word alone or joined to others by - or _ ("sphinxsidebar" too), never
# inside another word ("withsidebar" is the page body of one theme)
_SKIP_CLASSES = re.compile(r"(^|[\s_-])(sphinxsidebar|sidebar|related|footer|header|navigation|navbar|navheader|"
                           r"navfooter|breadcrumbs?|toc|toctree-wrapper|search|headerlink|copyright|"
                           r"admonition-title|rustdoc-toggle|since|srclink)([\s_-]|$)")
_PAGE_TAGS = {"html", "body", "article"}
_VOID = {"br", "img", "hr", "meta", "link", "input", "wbr", "col", "area", "base", "source", "track", "embed"}


class _Paragraphs(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.paragraphs: list[str] = []
        self._buffer: list[str] = []
        self._stack: list[tuple[str, bool]] = []  # (tag, skipped)
        self._depth_in_paragraph = 0

    def _skipping(self) -> bool:
        return any(skipped for _, skipped in self._stack)

    def _flush(self) -> None:
        text = " ".join("".join(self._buffer).split())
        if text:
            self.paragraphs.append(text)
        self._buffer = []

    def handle_starttag(self, tag, attrs):
        if tag in _VOID:
            if tag == "br":
                self._buffer.append(" ")
            return
        classes = " ".join(v or "" for k, v in attrs if k in ("class", "role", "id"))
        # a page's outermost elements name its layout ("sidebar-visible"), not furniture to drop
        skipped = tag in _SKIP_TAGS or (tag not in _PAGE_TAGS and bool(_SKIP_CLASSES.search(classes)))
        if tag in _PARAGRAPH_TAGS or tag.startswith("h") and tag[1:].isdigit() or tag == "div":
            self._flush()  # a nested block ends the paragraph around it
        self._stack.append((tag, skipped))

    def handle_endtag(self, tag):
        if tag in _VOID:
            return
        # close up to the matching open tag (HTML in the wild leaves <p> and <li> unclosed)
        for i in range(len(self._stack) - 1, -1, -1):
            if self._stack[i][0] == tag:
                if not self._skipping() and (tag in _PARAGRAPH_TAGS or tag == "div"):
                    self._flush()
                elif tag.startswith("h") and tag[1:].isdigit():
                    self._buffer = []  # headings are titles, not prose
                del self._stack[i:]
                return

    def handle_data(self, data):
        if self._stack and not self._skipping() and any(t in _PARAGRAPH_TAGS or t == "div" for t, _ in self._stack):
            self._buffer.append(data)


def html_paragraphs(page: str) -> list[str]:
    """The text of a page's paragraph-like elements, one string each, code blocks and page furniture left out."""
    parser = _Paragraphs()
    parser.feed(page)
    parser.close()
    parser._flush()
    return parser.paragraphs


_POD_CODE = re.compile(r"[A-Z]<<+\s(.*?)\s>>+|[A-Z]<([^<>]*)>", re.S)
_POD_ESCAPES = {"lt": "<", "gt": ">", "verbar": "|", "sol": "/", "quot": '"', "amp": "&"}


def _pod_text(text: str) -> str:
    """POD formatting codes reduced to their text: L<text|target> keeps text, E<lt> is '<', Z<> and X<> vanish."""
    def one(match: re.Match) -> str:
        whole, inner = match.group(0), match.group(1) if match.group(1) is not None else match.group(2)
        code = whole[0]
        if code in "XZ":
            return ""
        if code == "E":
            return _POD_ESCAPES.get(inner, "")
        if code == "L":
            if "|" in inner:
                return inner.split("|", 1)[0]
            return inner if "://" in inner else inner.replace('/"', " ").strip('"/ ')
        return inner
    for _ in range(8):  # nested codes: innermost first
        text, n = _POD_CODE.subn(one, text)
        if not n:
            break
    return text


def pod_paragraphs(pod: str) -> list[str]:
    """A POD file's text paragraphs (not its verbatim code paragraphs, not its commands), formatting codes resolved."""
    out, in_pod, skip_block = [], True, False
    for block in re.split(r"\n[ \t]*\n", pod):
        if not block.strip():
            continue
        if block.startswith("="):
            command = block.split(None, 1)[0]
            if command == "=cut":
                in_pod = False
            elif command in ("=pod", "=head1", "=head2", "=head3", "=head4", "=over", "=back", "=item"):
                in_pod = True
            if command == "=begin":
                skip_block = True
            elif command == "=end":
                skip_block = False
            continue
        if not in_pod or skip_block or block[0] in " \t":
            continue
        out.append(" ".join(_pod_text(block).split()))
    return [p for p in out if p]


_SENTENCE_END = re.compile(r"[.!?:;]['\")\]]?$")


def is_prose(paragraph: str, min_words: int = 8, min_letter_share: float = 0.7) -> bool:
    """Running text: enough words, a sentence's ending, mostly letters and spaces (not code or a table row)."""
    if len(paragraph.split()) < min_words or not _SENTENCE_END.search(paragraph):
        return False
    letters = sum(c.isalpha() or c == " " for c in paragraph)
    return letters / len(paragraph) >= min_letter_share
