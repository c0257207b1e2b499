// STUB main (owner: cli)
#include "commands.h"
int main(int argc, char** argv) {
  CLI::App app{"ringpack"};
  CLI11_PARSE(app, argc, argv);
  return 0;
}
