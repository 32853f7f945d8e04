// Package mysql stores kite's revision log in a MySQL (8.0 and later) or
// MariaDB (10.6 and later) database, InnoDB tables only.
package mysql
