"""The viewer's colours (static/style.css) pass WCAG contrast against the page, in light and
dark mode: the charts' bars and legend keys 3:1 (non-text, 1.4.11), text 4.5:1 (1.4.3)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import statekeep.web

CSS = (Path(statekeep.web.__file__).parent / "static" / "style.css").read_text()
BARS = ("model", "tool", "doubt", "bad", "tok-in", "tok-out", "tok-total", "accent")
TEXT = ("fg", "muted", "accent")


def variables(block: str) -> dict[str, str]:
    return dict(re.findall(r"--([\w-]+):\s*(#[0-9a-fA-F]{6})", block))


def schemes() -> dict[str, dict[str, str]]:
    """Each scheme's colour variables: light (every top-level :root), dark (light overridden
    by the :root inside the prefers-color-scheme: dark block)."""
    dark_at = CSS.index("@media (prefers-color-scheme: dark)")
    light: dict[str, str] = {}
    for block in re.findall(r":root\s*\{([^}]*)\}", CSS[:dark_at]):
        light.update(variables(block))
    dark = {**light, **variables(re.search(r":root\s*\{([^}]*)\}", CSS[dark_at:]).group(1))}  # type: ignore[union-attr]
    return {"light": light, "dark": dark}


def luminance(colour: str) -> float:
    channels = [int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    r, g, b = (c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a: str, b: str) -> float:
    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_chart_colours_pass_contrast_against_the_page(scheme: str) -> None:
    colours = schemes()[scheme]
    low = {
        name: round(contrast(colours[name], colours["bg"]), 2)
        for name in BARS
        if contrast(colours[name], colours["bg"]) < 3
    }
    assert low == {}, f"{scheme}: under 3:1 against the page"
    low = {
        name: round(contrast(colours[name], colours["bg"]), 2)
        for name in TEXT
        if contrast(colours[name], colours["bg"]) < 4.5
    }
    assert low == {}, f"{scheme}: text under 4.5:1"


def test_dark_mode_changes_every_colour_the_charts_use() -> None:
    light, dark = schemes()["light"], schemes()["dark"]
    assert [name for name in (*BARS, "bg", "fg", "muted") if light[name] == dark[name]] == []
