/* cli_chat.h: the "chat" command of cbllm-cli (chat templates). */
#ifndef CBLLM_CLI_CHAT_H
#define CBLLM_CLI_CHAT_H

/* cbllm-cli chat -m DIR --render: render the JSON request on standard input; the exit status. */
int			cli_chat_main(int argc, char **argv);

#endif
