"""MkDocs hook: the menu of mkdocs.yml, less the pages that do not exist yet, plus any page
that exists but is not listed (under "More", titled by its first heading)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _prune(items: list[Any], docs: Path, listed: set[str]) -> list[Any]:
    kept: list[Any] = []
    for item in items:
        if isinstance(item, dict):
            ((title, value),) = item.items()
            if isinstance(value, list):
                children = _prune(value, docs, listed)
                if children:
                    kept.append({title: children})
            elif (docs / value).is_file():
                listed.add(value)
                kept.append(item)
        elif isinstance(item, str) and (docs / item).is_file():
            listed.add(item)
            kept.append(item)
    return kept


def _title(page: Path) -> str:
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return page.stem.replace("-", " ").capitalize()


def on_config(config: Any, **kwargs: Any) -> Any:
    """Prune and complete ``config["nav"]``."""
    docs = Path(config["docs_dir"])
    listed: set[str] = set()
    nav = _prune(config["nav"] or [], docs, listed)
    extra = [{_title(p): p.name} for p in sorted(docs.glob("*.md")) if p.name not in listed]
    if extra:
        nav.append({"More": extra})
    config["nav"] = nav
    return config
