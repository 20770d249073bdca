from textkit.slug import slugify, unique_slug


def test_slugify_basic():
    assert slugify("Hello, World!") == "hello-world"


def test_slugify_replacements():
    assert slugify("Cats & Dogs @ Home") == "cats-and-dogs-at-home"


def test_slugify_accents():
    assert slugify("Crème Brûlée") == "creme-brulee"


def test_slugify_separator():
    assert slugify("a b c", separator="_") == "a_b_c"


def test_slugify_max_length_cuts_at_word():
    assert slugify("the quick brown fox", max_length=12) == "the-quick"


def test_slugify_max_length_exact_word_end():
    assert slugify("the quick brown fox", max_length=15) == "the-quick-brown"


def test_slugify_max_length_single_word():
    assert slugify("supercalifragilistic", max_length=5) == "super"


def test_slugify_empty():
    assert slugify("!!!") == ""


def test_unique_slug():
    assert unique_slug("My Post", set()) == "my-post"
    assert unique_slug("My Post", {"my-post"}) == "my-post-2"
    assert unique_slug("My Post", {"my-post", "my-post-2"}) == "my-post-3"
