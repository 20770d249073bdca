from textkit.cases import camel_case, kebab_case, snake_case, split_words, title_case


def test_split_words_camel_and_acronyms():
    assert split_words("parseHTTPResponse2") == ["parse", "HTTP", "Response", "2"]


def test_split_words_separators():
    assert split_words("hello_world-again now") == ["hello", "world", "again", "now"]


def test_snake_case():
    assert snake_case("UserAccountID") == "user_account_id"


def test_kebab_case():
    assert kebab_case("Some Title Here") == "some-title-here"


def test_camel_case():
    assert camel_case("user_account_id") == "userAccountId"
    assert camel_case("") == ""


def test_title_case_small_words():
    assert title_case("the lord of the rings") == "The Lord of the Rings"


def test_title_case_small_word_last():
    assert title_case("what it is made of") == "What It Is Made Of"


def test_title_case_single_word():
    assert title_case("hELLO") == "Hello"
