-- The least privileges gorge-webhook needs on Phorge's database: read the hooks, read and update requests.
-- Run as a MariaDB/MySQL administrator after Phorge's `bin/storage upgrade` (table-level grants need the
-- tables), with the placeholders replaced, e.g.:
--   sed -e 's/@NAMESPACE@/phabricator/g' -e 's/@USER@/gorge/g' -e 's/@HOST@/%/g' \
--       -e 's/@PASSWORD@/change-me/g' scripts/grants.sql | mariadb -u root -p
-- The optional read-only grants (silent mode, PHP-delivery detection, transaction order) are printed, with
-- what each one is for, by `python manage.py print_grants`.
CREATE USER IF NOT EXISTS '@USER@'@'@HOST@' IDENTIFIED BY '@PASSWORD@';
GRANT SELECT ON `@NAMESPACE@_herald`.`herald_webhook` TO '@USER@'@'@HOST@';
GRANT SELECT, UPDATE ON `@NAMESPACE@_herald`.`herald_webhookrequest` TO '@USER@'@'@HOST@';
