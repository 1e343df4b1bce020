#!/bin/sh
# Runs once, when the postgres image initialises an empty data volume
# (/docker-entrypoint-initdb.d). It creates the demo export source: database crm with a
# customers table (5,000 rows of tenant acme, 3,000 of globex; email is the sensitive column)
# and a read-only role crm_reader, whose password is the last field of the crm-reader-pgpass
# secret, the same file the worker's dataset DSN reads (passfile=…). Not needed for jobgate
# itself: drop it with the dataset, or point cmd/deploy/datasets.json at your own database.
set -eu

pw=$(head -n 1 /run/secrets/crm-reader-pgpass | cut -d: -f5-)

psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres -v pw="$pw" <<'SQL'
CREATE ROLE crm_reader LOGIN PASSWORD :'pw';
CREATE DATABASE crm;
SQL

psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname crm <<'SQL'
CREATE TABLE customers (
  id          bigint PRIMARY KEY,
  tenant      text   NOT NULL,
  name        text   NOT NULL,
  email       text   NOT NULL,
  country     text   NOT NULL,
  plan        text   NOT NULL,
  signup_date date   NOT NULL
);
CREATE INDEX customers_tenant_id ON customers (tenant, id);
INSERT INTO customers
SELECT i,
       CASE WHEN i <= 5000 THEN 'acme' ELSE 'globex' END,
       'Customer ' || i,
       'customer' || i || '@example.com',
       (ARRAY['DE', 'FR', 'US', 'JP', 'BR'])[1 + i % 5],
       (ARRAY['free', 'team', 'enterprise'])[1 + i % 3],
       DATE '2020-01-01' + (i % 1800)
FROM generate_series(1, 8000) AS i;
REVOKE ALL ON DATABASE crm FROM PUBLIC;
GRANT CONNECT ON DATABASE crm TO crm_reader;
GRANT USAGE ON SCHEMA public TO crm_reader;
GRANT SELECT ON customers TO crm_reader;
SQL
