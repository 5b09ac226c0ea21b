"""idlib.report.prose: values glued into a page's prose are plain text, the same on every CPU."""
import pytest
from IPython.core.formatters import format_display_data

from idlib.report.prose import Text, glue_text, glue_values, words


def test_words_lists_as_a_reader_says_it():
    assert words([1]) == "1"
    assert words([1, 2]) == "1 and 2"
    assert words(["a", "b", "c"], last="or") == "a, b or c"
    with pytest.raises(ValueError, match="nothing to list"):
        words([])


def test_glue_text_keeps_integers_and_quotes_nothing():
    assert glue_text(8) == 8 and type(glue_text(8)) is int
    plain = format_display_data(glue_text("1 and 2"))[0]["text/plain"]
    assert plain == "1 and 2"                  # no quotes, as {glue:text} shows it
    assert format_display_data(glue_text(True))[0]["text/plain"] == "True"
    assert glue_text("0.41") == Text("0.41")


def test_glue_text_refuses_an_unformatted_float():
    with pytest.raises(TypeError, match="format the float 0.1"):
        glue_text(0.1)


def test_glue_values_glues_each_value_undisplayed():
    calls = []
    glue_values(lambda name, value, display: calls.append((name, value, display)),
                rope_d=8, rope_heads=words([1, 2]))
    assert calls == [("rope_d", 8, False), ("rope_heads", Text("1 and 2"), False)]
