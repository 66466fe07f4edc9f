"""A float64 erf for test references (no scipy): math.erf, vectorised."""

import math

import numpy as np

erf = np.vectorize(math.erf, otypes=[np.float64])
