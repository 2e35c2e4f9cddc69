-- Atrium's owner role and database. The postgres image runs this once, as its superuser,
-- when it starts on an empty data volume (compose.yaml mounts it into
-- /docker-entrypoint-initdb.d); `atrium migrate` does the rest as the owner
-- (docs/operations.md#first-deployment).
--
-- The owner is not a superuser and cannot bypass row-level security. It owns the database
-- (so it may create the tables and pg-boss's schema), and it holds CREATEROLE because the
-- migrations create the role atrium_app and `atrium migrate` creates the application's login
-- in it. On PostgreSQL 16 and later, CREATEROLE reaches only the roles the owner created.
\set ON_ERROR_STOP on
\getenv owner_password ATRIUM_OWNER_PASSWORD
CREATE ROLE atrium LOGIN CREATEROLE NOSUPERUSER NOCREATEDB NOREPLICATION NOBYPASSRLS PASSWORD :'owner_password';
CREATE DATABASE atrium OWNER atrium;
