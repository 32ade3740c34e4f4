#include "commands.h"
int vmtrack_cmd_info(int, char **) { return 2; }
