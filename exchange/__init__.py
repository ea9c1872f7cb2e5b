from exchange.coefficients import token_coefficients
from exchange.errors import ExchangeError, InvalidArgument, ObjectiveError, RolloutError
from exchange.rollout import Rollout
