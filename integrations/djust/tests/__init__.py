# integrations/djust/tests: unit tests of roomgate_handoff (unittest; Django is the only dependency).
