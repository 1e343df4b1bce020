#!/bin/sh
# One-shot, run by the temporal-schema service (temporalio/admin-tools) before the server starts:
# creates Temporal's two PostgreSQL databases if missing and brings both schemas to the version
# this admin-tools image ships. Idempotent: every later run only applies what is new, so run it
# again with the new admin-tools image before upgrading temporalio/server.
set -eu

: "${SQL_HOST:?}" "${SQL_USER:?}" "${POSTGRES_PASSWORD_FILE:?}"
SQL_PASSWORD=$(cat "$POSTGRES_PASSWORD_FILE")
export SQL_PASSWORD SQL_PLUGIN=postgres12

for db in temporal temporal_visibility; do
  if temporal-sql-tool --db "$db" setup-schema -v 0.0 >/dev/null 2>&1; then
    echo "database $db exists"
  else
    echo "creating database $db"
    temporal-sql-tool --db "$db" create
    temporal-sql-tool --db "$db" setup-schema -v 0.0
  fi
done
temporal-sql-tool --db temporal update-schema --schema-name postgresql/v12/temporal
temporal-sql-tool --db temporal_visibility update-schema --schema-name postgresql/v12/visibility
echo "temporal schemas are up to date"
