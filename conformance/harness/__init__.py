"""The pytest harness: the plugin, records, worker isolation and launch."""
