"""Result records, review reports, the version matrix and the upgrade gate."""
