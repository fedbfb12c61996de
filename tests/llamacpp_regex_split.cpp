// The std::regex step of llama.cpp's unicode_regex_split (src/unicode.cpp, unicode_regex_split_stl): split each
// text into its matches and the text between them, with the same engine and flags. Reads "c <regex hex>"
// (std::regex over one byte per character: llama.cpp's "collapsed" text) or "w <regex hex>" (std::wregex over
// code points, 8 hex digits each), then one text per line; writes each text's piece lengths, comma-separated.
#include <iostream>
#include <regex>
#include <string>

template <typename Char>
static std::basic_string<Char> from_hex(const std::string & hex) {
    const size_t width = sizeof(Char) == 1 ? 2 : 8;  // a byte, or a code point in a wchar_t
    std::basic_string<Char> out;
    for (size_t i = 0; i + width <= hex.size(); i += width) {
        out.push_back((Char) std::stoul(hex.substr(i, width), nullptr, 16));
    }
    return out;
}

template <typename Char>
static void split_lines(const std::string & regex_hex) {
    const std::basic_regex<Char> expr(from_hex<Char>(regex_hex), std::regex_constants::optimize | std::regex_constants::nosubs);
    std::string line;
    while (std::getline(std::cin, line)) {
        const std::basic_string<Char> text = from_hex<Char>(line);
        std::regex_iterator<const Char *> it(text.data(), text.data() + text.size(), expr), end;
        long done = 0;
        std::string sep;
        for (; it != end; ++it) {
            if (it->position() > done) {
                std::cout << sep << it->position() - done;
                sep = ",";
            }
            std::cout << sep << it->length();
            sep = ",";
            done = it->position() + it->length();
        }
        if (done < (long) text.size()) {
            std::cout << sep << (long) text.size() - done;
        }
        std::cout << "\n";
    }
}

int main() {
    std::string mode, regex_hex, rest;
    std::cin >> mode >> regex_hex;
    std::getline(std::cin, rest);
    if (mode == "c") {
        split_lines<char>(regex_hex);
    } else {
        split_lines<wchar_t>(regex_hex);
    }
}
