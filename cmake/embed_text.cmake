# Writes OUT, a C++ file defining atrium::api::OpenApiDocument() that returns
# the text of IN. Raw-string delimiter chosen so JSON can never close it.
file(READ ${IN} CONTENT)
file(WRITE ${OUT} "#include <string>\nnamespace atrium::api {\nconst std::string& OpenApiDocument() {\n  static const std::string kDoc = R\"atrium_embed(${CONTENT})atrium_embed\";\n  return kDoc;\n}\n}  // namespace atrium::api\n")
