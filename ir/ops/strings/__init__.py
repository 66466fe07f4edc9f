"""String tensors (numpy object arrays of Python str), all run on the host.

    text   StringNormalizer, StringSplit, StringConcat, RegexFullMatch
    re2    RE2 patterns run with Python's `re`
    tfidf  TfIdfVectorizer
"""
