"""What talks to the coordinator from outside: the HTTP client (``client``) and every
command line (``cli``: ``reservoir server``; ``transfer_cli``, ``link_cli``,
``campaign_upload``). Nothing of the coordinator imports this package."""
