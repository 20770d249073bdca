# Shared by every step's test.sh (Harbor uploads tests/ under each step's tests/).
score() { if "$@"; then echo 1; else echo 0; fi > /logs/verifier/reward.txt; }
