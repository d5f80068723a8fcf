"""The dashboard: its sources (src/) and the folder the coordinator serves (dist/, built
by ``npm run build``).

Installed as the package data of ``reservoir.web``; the coordinator finds dist/ through
:mod:`reservoir.shipped`.
"""
