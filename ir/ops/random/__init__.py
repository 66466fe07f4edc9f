"""Random numbers.

    generators  RandomNormal, RandomUniform, their -Like forms, Bernoulli, Multinomial
    dropout     Dropout (identity in inference; masks drawn in training mode)
"""
