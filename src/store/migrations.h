#pragma once

#include "common/result.h"
#include "store/sql.h"

namespace atrium {

// Brings the schema to the newest version, applying each missing migration
// in its own transaction and recording it in schema_migrations. Safe to run
// at every start and from several processes (the first one wins).
Status ApplyMigrations(sql::Database& db);

// The newest schema version this build knows.
int LatestSchemaVersion();

}  // namespace atrium
