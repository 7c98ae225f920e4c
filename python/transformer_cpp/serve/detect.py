"""Language detection for ``POST /detect`` and LibreTranslate's ``source: "auto"``, with the
``lingua-language-detector`` package (in the ``serve`` extra), restricted to the source languages
of the models served."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

from .config import ServeError

__all__ = ["DETECT_EXTRA_HINT", "LanguageDetector"]

DETECT_EXTRA_HINT = (
    'language detection needs the lingua-language-detector package: pip install "transformer-cpp[serve]"'
)


class LanguageDetector:
    """Detects which of ``languages`` (codes such as ``"en"``) a text is in. Built on first use;
    with one language nothing is detected: that language is answered with confidence 0."""

    def __init__(self, languages: Sequence[str]) -> None:
        self.languages = list(languages)
        self._detector: Any = None
        self._known: Dict[str, str] = {}

    def _build(self) -> Any:
        try:
            from lingua import IsoCode639_1, Language, LanguageDetectorBuilder
        except ImportError:
            raise ServeError(501, DETECT_EXTRA_HINT) from None
        if self._detector is None and len(self.languages) > 1:
            chosen = []
            for code in self.languages:
                try:
                    chosen.append(Language.from_iso_code_639_1(IsoCode639_1.from_str(code)))
                except (ValueError, AttributeError, KeyError):
                    continue  # a language lingua does not know is never detected
            if len(chosen) > 1:
                self._detector = LanguageDetectorBuilder.from_languages(*chosen).with_low_accuracy_mode().build()
        return self._detector

    def detect(self, text: str, among: Optional[Sequence[str]] = None) -> List[Dict[str, Any]]:
        """LibreTranslate's answer for one text: ``[{"language": "es", "confidence": 90.0}, ...]``,
        most likely first (confidence in percent), among ``among`` when given; :class:`ServeError`
        501 when the detector is not installed."""
        candidates = [c for c in self.languages if among is None or c in among]
        detector = self._build()
        if detector is None or len(candidates) < 2:
            return [{"language": candidates[0] if candidates else self.languages[0], "confidence": 0.0}]
        values = detector.compute_language_confidence_values(text)
        found = [(v.language.iso_code_639_1.name.lower(), float(v.value)) for v in values]
        ranked = [(code, value) for code, value in found if code in candidates]
        total = sum(value for _, value in ranked) or 1.0
        return [{"language": code, "confidence": round(100.0 * value / total, 1)} for code, value in ranked]
