// SqliteStore's schema (store.cc): SQL migrations applied in order; the table schema_version
// holds how many a database has. A new migration is appended, never edited once released.
#pragma once

#include <span>

namespace mlsched::server {

/// The migrations, oldest first: migration i+1 is element i (one or more SQL statements).
std::span<const char* const> SchemaMigrations();

}  // namespace mlsched::server
