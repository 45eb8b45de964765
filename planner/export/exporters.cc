// (being written)
#include "planner/export/exporters.h"
