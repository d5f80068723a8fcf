"""The configuration Reservoir ships: tuning profiles (tuning/), campaigns (campaigns/),
lab topologies (lab/) and example agent and target files.

Installed as the package data of ``reservoir.config``; code finds it through
:mod:`reservoir.shipped`, never by walking up from a source file.
"""
