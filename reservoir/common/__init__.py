"""Small pieces that every layer may use and that use nothing of the project above
them: atomic JSON files (:mod:`.store`), bearer tokens at rest (:mod:`.tokens`),
settings files (:mod:`.settings_file`), ``HOST:PORT`` (:mod:`.listen`), the HTTP APIs'
boundary (:mod:`.http_boundary`), their error answers (:mod:`.problems`) and request
ids (:mod:`.request_id`), Jain's index (:mod:`.fairness`), streams dealt to
links (:mod:`.placement`) and programs built from shipped sources
(:mod:`.build_cache`). The README's layer drawing puts them at the bottom, and
tests/unit/test_layers.py keeps them there."""
